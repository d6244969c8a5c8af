"""The daemon's HTTP side: its routes over the telemetry, and the server with the settings' TLS, basic
auth and limits."""

from __future__ import annotations

from collections.abc import Callable

from warptd.config import Settings
from warptd.daemon.telemetry import Telemetry
from warptd.http.app import Router
from warptd.http.limits import (
    HttpLimits,
    favour_the_event_loop,
    raise_nofile_limit,
    return_large_buffers,
    share_heap_arenas,
)
from warptd.http.openapi import add_openapi_route
from warptd.http.routes import CoreApi
from warptd.http.server import WarptdHTTPServer
from warptd.http.stress_routes import StressApi
from warptd.http.webconfig import BasicAuth, load_web_config, ssl_context
from warptd.http.window_routes import WindowApi
from warptd.http.workload_routes import WorkloadApi


def make_router(telemetry: Telemetry, token: Callable[[], str | None]) -> Router:
    """Every route over ``telemetry``; those that start work take the stress ``token`` as it is now."""
    router = Router()
    CoreApi.add(router, telemetry.snapshot, telemetry.exposition, telemetry.loaded.unavailable)
    StressApi.add(router, telemetry.stress, token)
    WindowApi.add(router, telemetry.windows, token)
    WorkloadApi.add(router, telemetry.workloads, token, telemetry.workload_history)
    add_openapi_route(router)
    return router


def make_server(settings: Settings, router: Router) -> WarptdHTTPServer:
    """The server, listening (not yet serving) on ``listen`` with the web config's TLS and basic auth,
    in a process tuned for thousands of connections and large answers."""
    host, port = settings.listen_address
    web = load_web_config(settings.web_config_file) if settings.web_config_file else None
    raise_nofile_limit()  # thousands of connections need thousands of descriptors
    return_large_buffers()  # report bodies are megabytes: give their memory back once sent
    share_heap_arenas()  # fewer glibc heaps, fewer freed pages kept between live ones
    favour_the_event_loop()  # a scrape waits a shorter turn for the GIL behind busy handlers
    return WarptdHTTPServer(
        host,
        port,
        router,
        limits=HttpLimits.of(settings),
        tls=ssl_context(web.tls_server_config) if web and web.tls_server_config else None,
        basic_auth=BasicAuth(web.basic_auth_users) if web and web.basic_auth_users else None,
    )
