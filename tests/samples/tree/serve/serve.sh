#!/bin/sh
exec python -m sglang.launch_server "$@"