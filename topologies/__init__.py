"""Mininet fabrics of the testbed: switch and host nodes, MrcNetwork, faults, the demo, its
report and live view, and runs over several servers."""
