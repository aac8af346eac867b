#!/bin/sh
# A minimal nginx reverse proxy on loopback, as the yardstick for verdict's
# pass-through path in `examples/loadtest.rs` (issue 7). Optional: the load
# harness skips the nginx scenario when `nginx` is not on PATH.
#
#   bench/nginx.sh start DIR LISTEN_PORT UPSTREAM_PORT WORKERS
#   bench/nginx.sh stop DIR
#
# `start` writes DIR/nginx.conf and starts nginx as a daemon whose pid file,
# logs and temp dirs all live in DIR; `stop` stops it (SIGQUIT, graceful).
# The config mirrors what verdict does on an unmatched route: HTTP/1.1 to the
# upstream over a keep-alive pool, X-Forwarded-For/-Proto set, no access log,
# no limit on requests per client or upstream connection. WORKERS should match
# verdict's runtime worker threads (Tokio's default: one per CPU, `nproc`).
set -eu

cmd=${1:-}
case "$cmd" in
start)
    [ $# -eq 5 ] || { echo "usage: $0 start DIR LISTEN_PORT UPSTREAM_PORT WORKERS" >&2; exit 2; }
    dir=$2 port=$3 up=$4 workers=$5
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    cat > "$dir/nginx.conf" <<CONF
worker_processes $workers;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
worker_rlimit_nofile 16384;
events {
    worker_connections 8192;
}
http {
    access_log off;
    client_body_temp_path $dir/client_body;
    proxy_temp_path $dir/proxy;
    fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi;
    scgi_temp_path $dir/scgi;
    keepalive_requests 10000000;
    keepalive_timeout 75s;
    upstream app {
        server 127.0.0.1:$up;
        keepalive 256;
        keepalive_requests 10000000;
    }
    server {
        listen 127.0.0.1:$port;
        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto \$scheme;
        }
    }
}
CONF
    nginx -p "$dir" -c "$dir/nginx.conf" -t -q
    nginx -p "$dir" -c "$dir/nginx.conf"
    # Wait for the pid file (the master writes it once it listens).
    i=0
    while [ ! -s "$dir/nginx.pid" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    [ -s "$dir/nginx.pid" ] || { echo "nginx did not start; see $dir/error.log" >&2; exit 1; }
    cat "$dir/nginx.pid"
    ;;
stop)
    [ $# -eq 2 ] || { echo "usage: $0 stop DIR" >&2; exit 2; }
    dir=$2
    [ -s "$dir/nginx.pid" ] || exit 0
    nginx -p "$dir" -c "$dir/nginx.conf" -s quit
    i=0
    while [ -e "$dir/nginx.pid" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    ;;
*)
    echo "usage: $0 start DIR LISTEN_PORT UPSTREAM_PORT WORKERS | stop DIR" >&2
    exit 2
    ;;
esac
