"""The paper's experiments on the emulated fabric: link, plane and switch failures, flaps,
the incast victim, start-up, and the all-reduce collective."""
