"""The live view: the run report's page, served on 127.0.0.1 while the fabric runs (--web).

aiohttp (docs/decisions.md, "The live view") serves two things, both only to a request that
carries this run's token (from `secrets`, in the address printed at start): the page
(topologies.runreport with no samples and the token) and `samples?since=N`, the recorder's
samples from N on and the link events so far, which the page polls twice a second. There
are no control actions. The server listens on 127.0.0.1 only, in a thread with its own event
loop, and is stopped with the fabric; its port is free (0) unless one is asked for. Every
asset is the page itself: nothing is fetched from elsewhere.

The recorder (topologies.runview) samples for as long as the view is up; memory grows by a
sample per half second (a few kB with the default fabric).
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from contextlib import ExitStack
from typing import Any

from aiohttp import web

from topologies.demo import flow_capacity_bps
from topologies.runreport import render
from topologies.runview import RunRecorder

LOOPBACK = "127.0.0.1"
DEFAULT_WEB_PORT = 8765  # --web and mrc_web without a port; the Vagrant lab forwards it
START_TIMEOUT_S = 10.0
MAX_SAMPLES_PER_ANSWER = 2000  # a page that fell behind catches up in a few polls


class LiveViewError(RuntimeError):
    """The view could not start (its port taken, say)."""


class LiveView:
    """Serve `net`'s run (samples of the transfer src -> dst) at url() until stop()."""

    def __init__(self, net: Any, src: int, dst: int, *, title: str,
                 capacity_bps: float | None = None, port: int = 0) -> None:
        self.token = secrets.token_urlsafe(24)
        self.recorder = RunRecorder(net, src, dst)
        self._title, self._capacity, self._port = title, capacity_bps, port
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._serve, name="live-view", daemon=True)

    def start(self) -> str:
        """Start sampling and serving; the page's address (with its token)."""
        self.recorder.start()
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S) or self._error is not None:
            self.stop()
            raise LiveViewError(f"the live view did not start: {self._error}")
        return self.url()

    def url(self) -> str:
        return f"http://{LOOPBACK}:{self._port}/?token={self.token}"

    def stop(self) -> None:
        """Stop serving and sampling (idempotent)."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(
                START_TIMEOUT_S)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(START_TIMEOUT_S)
        self.recorder.stop()

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
        empty = {**self.recorder.layout(), "samples": []}
        return web.Response(text=render(empty, title=self._title, capacity_bps=self._capacity,
                                        live_token=self.token),
                            content_type="text/html", headers={"Cache-Control": "no-store"})

    async def _samples(self, request: web.Request) -> web.Response:
        self._authorised(request)
        try:
            since = int(request.query.get("since", "0"))
        except ValueError:
            raise web.HTTPBadRequest(text="since must be a sample index\n") from None
        if since < 0:
            raise web.HTTPBadRequest(text="since must be >= 0\n")
        samples = self.recorder.samples[since:since + MAX_SAMPLES_PER_ANSWER]
        return web.json_response({"samples": samples, "events": self.recorder.events()},
                                 headers={"Cache-Control": "no-store"})


def start_view(net: Any, stack: ExitStack, port: int, single_path: bool = False) -> str:
    """A live view of `net`'s first-to-last-host transfer (the demo's), stopped when `stack`
    closes; its address."""
    fabric = net.fabric
    view = LiveView(net, 0, fabric.hosts - 1, port=port,
                    title=f"MRC fabric, {fabric.planes} planes ({net.target}), live",
                    capacity_bps=flow_capacity_bps(fabric, net.config.port_rate_pps,
                                                   single_path))
    url = view.start()
    stack.callback(view.stop)
    return url
