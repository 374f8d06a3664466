"""An MRC endpoint served from another process, believed only where the caller cannot see for
itself: `endpoint.py` (RemoteEndpoint, the Endpoint interface answered over a Link, with the
caller's own route book and shadow memory) and `codec.py` (the line protocol, declared once
for both sides). The grader's simulator and an agent started with --served-core use it around
a student's core that runs in the sandbox (rubrics.core_server).
"""
