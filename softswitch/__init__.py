"""Software MRC switch: the p4src/ pipeline in Python behind a P4Runtime server."""
