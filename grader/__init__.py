"""Course exercises and their autograder.

An exercise is a part of the project's own code, fenced in the source by region markers
(grader.regions). `./testbed exercise N` writes the files with those regions replaced by
TODO stubs into a git-ignored working folder; `./testbed grade N` lays the student's files
over a temporary copy of the project (grader.workspace) and runs the exercise's checks inside
that copy, in a process of their own, so a student's mistake cannot reach the project's
modules or the grader itself. Exercise metadata: grader.catalog; checks: rubrics.
"""
