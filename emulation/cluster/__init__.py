"""One fabric over several servers (Mininet Cluster Edition): the servers, which node runs
where, the build there, the VXLAN links between servers and the cable cuts on them, and the
run's hold on each other server."""
