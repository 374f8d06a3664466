"""Tests of what a root run takes from the shared machine: private dir, ports, guards, run
state, output files."""
