"""Tests of the contracts: wire formats, the fabric model and its options."""
