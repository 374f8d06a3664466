"""What a root run takes from the shared machine and gives back: the private run directory,
the fabric lock and the run manifest, per-run keys, the loopback ports the switches listen on,
the nftables guards over them, and processes stopped by their own PID."""
