"""Tests of the P4 program: constants, P4Info, corpus, BMv2, queues, the soft switch against
BMv2."""
