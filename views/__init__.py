"""Seeing a run: the recorder that samples a running fabric, the self-contained HTML report
made from its recording (the page's script and style in `page/`), and the same page served
live."""
