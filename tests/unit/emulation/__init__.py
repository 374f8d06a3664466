"""Tests of the emulated network's units: builder seam, config, links, faults, views, the
demo's report."""
