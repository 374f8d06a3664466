"""The live view: the run report's page, served on 127.0.0.1 while the fabric runs (--web).

aiohttp (docs/decisions.md, "The live view") serves two things, both only to a request that
carries this run's token (from `secrets`, in the address printed at start): the page
(views.runreport with no samples and the token) and `samples?run=K&since=N`, the shown
run's samples from N on and the link events so far, which the page polls twice a second. There
are no control actions. The server listens on 127.0.0.1 only, in a thread with its own event
loop, and is stopped with the fabric; its port is free (0) unless one is asked for. Every
asset is the page itself: nothing is fetched from elsewhere.

The demo's recorder (views.runview) samples for as long as the view is up; memory grows
by a sample per half second (under 1 kB with the default fabric). The bench shows each
contender's run in turn (LiveView.show): a page of the previous run sees a new run number in
its next poll and reloads for the new fabric.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import secrets
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from aiohttp import web

from emulation.netconfig import flow_capacity_bps
from views.errors import ViewError
from views.runreport import render
from views.runview import RunRecorder

LOOPBACK = "127.0.0.1"
DEFAULT_WEB_PORT = 8765  # --web and mrc_web without a port; the Vagrant lab forwards it
START_TIMEOUT_S = 10.0
MAX_SAMPLES_PER_ANSWER = 2000  # a page that fell behind catches up in a few polls


class LiveViewError(ViewError, RuntimeError):
    """The view could not start (its port taken, say)."""


class LiveView:
    """Serve the run shown (show()) at url() until stop(): the demo's one transfer, or each of
    the bench's contender runs in turn (a page of an earlier run reloads for the next)."""

    def __init__(self, *, title: str, port: int = 0) -> None:
        self.token = secrets.token_urlsafe(24)
        self._title, self._port = title, port
        self._shown: tuple[int, RunRecorder] | None = None  # (run number, its recorder)
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="live-view", daemon=True)

    def start(self) -> str:
        """Start serving; the page's address (with its token)."""
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S) or self._error is not None:
            self.stop()
            raise LiveViewError(f"the live view did not start: {self._error}")
        return self.url()

    def show(self, recorder: RunRecorder) -> None:
        """From now on the page shows `recorder`'s run (started and stopped by its owner)."""
        number = self._shown[0] + 1 if self._shown is not None else 0
        self._shown = (number, recorder)

    def url(self) -> str:
        return f"http://{LOOPBACK}:{self._port}/?token={self.token}"

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(
                START_TIMEOUT_S)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(START_TIMEOUT_S)

    # ---- the server thread -------------------------------------------------------------------

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._open())
        except OSError as exc:  # the port is taken, say: start() reports it
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _open(self) -> None:
        app = web.Application()
        app.router.add_get("/", self._page)
        app.router.add_get("/samples", self._samples)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, LOOPBACK, self._port)
        await site.start()
        self._port = self._runner.addresses[0][1]

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _authorised(self, request: web.Request) -> None:
        if not secrets.compare_digest(request.query.get("token", ""), self.token):
            raise web.HTTPForbidden(text="this view answers only the run that printed its "
                                         "address: use that address, token included\n")

    async def _page(self, request: web.Request) -> web.Response:
        self._authorised(request)
        headers = {"Cache-Control": "no-store"}
        shown = self._shown
        if shown is None:  # the bench before its first run: look again in a second
            return web.Response(text=WAITING_PAGE.format(title=html.escape(self._title)),
                                content_type="text/html", headers=headers)
        number, recorder = shown
        page = render([recorder.layout()], title=self._title,
                      live={"token": self.token, "run": number})
        return web.Response(text=page, content_type="text/html", headers=headers)

    async def _samples(self, request: web.Request) -> web.Response:
        self._authorised(request)
        try:
            since, run = int(request.query.get("since", "0")), int(request.query.get("run", "0"))
        except ValueError:
            raise web.HTTPBadRequest(text="since and run must be numbers\n") from None
        if since < 0:
            raise web.HTTPBadRequest(text="since must be >= 0\n")
        headers = {"Cache-Control": "no-store"}
        shown = self._shown
        if shown is None or shown[0] != run:  # another run is shown now: the page reloads
            return web.json_response({"run": None if shown is None else shown[0]},
                                     headers=headers)
        number, recorder = shown
        samples = recorder.samples[since:since + MAX_SAMPLES_PER_ANSWER]
        return web.json_response({"run": number, "samples": samples,
                                  "events": recorder.events(), "evs": recorder.layout()["evs"]},
                                 headers=headers)


WAITING_PAGE = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="1"><title>{title}</title></head>
<body><p>{title}: waiting for the first run to start.</p></body></html>"""


def add_view_args(p: argparse.ArgumentParser, what: str) -> None:
    """--web [PORT] and --report FILE, the same on every entry point that runs a fabric."""
    p.add_argument("--web", nargs="?", type=int, const=DEFAULT_WEB_PORT, default=None,
                   metavar="PORT",
                   help=f"serve the live view of {what} on 127.0.0.1:PORT (default "
                        f"{DEFAULT_WEB_PORT}) while the fabric runs; the address printed "
                        "carries this run's token")
    p.add_argument("--report", metavar="FILE", type=Path,
                   help=f"write {what}'s replayable report, one self-contained HTML file "
                        "that opens from disk (a new file)")


def start_view(net: Any, stack: ExitStack, port: int, single_path: bool = False) -> str:
    """A live view of `net`'s first-to-last-host transfer (the demo's), stopped when `stack`
    closes; its address."""
    fabric = net.fabric
    capacity = flow_capacity_bps(fabric, net.config.port_rate_pps, single_path, 0,
                                 fabric.hosts - 1)
    recorder = RunRecorder(net, [(0, fabric.hosts - 1)], name="h0 -> last host",
                           capacity_bps=capacity)
    view = LiveView(port=port,
                    title=f"MRC fabric, {fabric.planes} planes ({net.target}), live")
    url = view.start()
    stack.callback(view.stop)
    view.show(recorder.start())
    stack.callback(recorder.stop)
    return url
