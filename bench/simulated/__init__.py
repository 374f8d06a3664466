"""The bench in the simulator: its scenarios written in the bench's results format, the
paper's scale figures, the simulator's own speed, and its agreement with the emulation."""
