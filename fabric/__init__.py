"""The fabric model: planes, T0 and T1 switches, hosts, ports, addresses and uSID paths, and
the options that name a fabric."""
