"""The contenders the bench runs on a fabric's hosts: MRC's flows (the agents' writes),
and kernel TCP and MPTCP flows beside them."""
