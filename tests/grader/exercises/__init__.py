"""Tests of each exercise graded: its reference, fixtures and checks."""
