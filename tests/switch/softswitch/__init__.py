"""Tests of the software switch: pipeline, P4Runtime server, process, limits, live sockets."""
