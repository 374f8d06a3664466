"""Benchmarks: MRC against RoCE-like, TCP and MPTCP on the emulated fabric, the paper's
experiments, and what the testbed's own parts cost."""
