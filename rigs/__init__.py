"""Test rigs shared by the tests and the grader: veth pairs in namespaces of their own, and
one BMv2 switch running golden-corpus cases."""
