"""gunicorn settings for the web process (the Procfile's `web`), read from the environment.

    gunicorn --config deploy/gunicorn.conf.py ticketagent.wsgi

Why gunicorn: the product is a WSGI application (Django views, htmx polling,
no websockets), gunicorn is the WSGI server Django's deployment docs lead with,
it is pure Python (nothing to compile), and its master process restarts crashed
workers and reloads gracefully on SIGHUP. Its request parser refuses what a
smuggling attempt needs (two Content-Length headers, Content-Length beside
chunked encoding) with 400 before Django sees the request.

    PORT / WEB_BIND     where to listen (default 127.0.0.1:$PORT, PORT default 8000;
                        WEB_BIND=0.0.0.0:8000 when a load balancer on another host connects)
    WEB_CONCURRENCY     worker processes (default 2; about 2 x cores is a common start)
    WEB_ACCESS_LOG      "-" (stdout, the default) or a file; empty turns the access log off
    FORWARDED_ALLOW_IPS the proxies whose X-Forwarded-* headers gunicorn believes (gunicorn's own variable)

Static files are served by WhiteNoise inside Django (settings.py), so one
process serves the whole site; put a CDN or a caching proxy in front if you like.
"""

import os

bind = [os.environ.get("WEB_BIND") or f"127.0.0.1:{os.environ.get('PORT', '8000')}"]
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
# Threads, not one request per process: a slow client (or a long upload) does not
# hold a whole worker process, and idle keep-alive connections cost a thread at most.
worker_class = "gthread"
threads = 4  # htmx polls are short: four threads keep a process busy without a queue behind a slow one
timeout = 60  # s: no page or upload takes a minute; a request that does is stuck, and its process is restarted
# SIGTERM: stop accepting, finish what is in flight for up to this long (systemd's
# TimeoutStopSec and make run's grace are longer), then exit.
graceful_timeout = 20
keepalive = 5
# Recycle each worker process after about a thousand requests (memory hygiene).
max_requests = 1000
max_requests_jitter = 100
accesslog = os.environ.get("WEB_ACCESS_LOG", "-") or None
errorlog = "-"
loglevel = os.environ.get("LOG_LEVEL", "info").lower()
# Request limits: gunicorn's defaults, written down. A larger body is Django's to
# judge (REQUEST_MAX_BYTES answers 413 before reading it).
limit_request_line = 4094
limit_request_fields = 100
limit_request_field_size = 8190
# Give each process its own database connections: no app preloading before fork.
preload_app = False
proc_name = "ticketagent-web"
# gunicorn 27 opens a control socket under ~/.gunicorn by default; nothing here uses it, and two
# servers on one host would fight over the path.
control_socket_disable = True
