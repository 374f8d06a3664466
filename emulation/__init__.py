"""The emulated network: MrcNetwork (a fabric of switch nodes, hosts and their agents on
Mininet), its configuration, links, link delay and pacing, faults, calibration of the port
rate and the fidelity monitor; `emulation.cluster` spreads the same network over several
servers."""
