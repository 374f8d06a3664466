"""Running untrusted code (a student's submission) without our privileges.

`sandbox.contain` runs one command in bubblewrap namespaces under a dedicated unprivileged uid
and rlimits, and `sandbox.supervise` watches it to its end; `sandbox.pipe` keeps such a
command alive to answer requests line by line. The grader and its rubrics use it; nothing in
it knows about grading.
"""
