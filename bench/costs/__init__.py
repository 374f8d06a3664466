"""What the testbed itself costs: frames per CPU-second through a switch, CPU per packet in
an agent and a switch, memory over a long run, the live view's sampling, and how each cost
grows with the fabric (`python -m bench.costs.scale`)."""
