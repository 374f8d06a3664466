"""The Mininet topology scripts users run: `two_tier.py` (the demo fabric and its CLI),
`custom.py` (for `mn --custom`) and the commands they add to the Mininet CLI."""
