"""Tests of the controller: tables, convergence, its CLI."""
