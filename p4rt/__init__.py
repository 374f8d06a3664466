"""P4Runtime names, P4Info, entities and their codec: the one place the P4 program's names and
IDs are known to Python."""
