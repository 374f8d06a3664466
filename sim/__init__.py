"""Deterministic discrete-event multi-plane fabric that drives the sans-IO MRC core.

The simulator moves real wire-format frames (wire) through the fabric of
fabric.topology, so the endpoint code under test is exactly the one that later
runs over raw sockets.
"""
