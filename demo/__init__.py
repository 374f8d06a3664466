"""The demo: one transfer sprayed over every path of the fabric, a link failed under it, and
the text that says what happened (`./testbed demo`, `topologies/two_tier.py`)."""
