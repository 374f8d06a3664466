"""Tests of the host agent's units: modes, adapter, loop, NIC buffers."""
