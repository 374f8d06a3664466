"""The Mininet switch nodes: a BMv2 or software switch process per node (or one software
switch process for many), started, made ready, crashed and rebooted by its own PID."""
