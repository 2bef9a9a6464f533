"""The live web console and Prometheus metrics of `kshim serve` (docs/console.md).

Served by the supervisor of a cluster (`kshim serve --brokers N`), which knows every broker and
carries out kill/start/pause/resume/isolate/heal, or by a single `kshim serve` in its own process;
on its own port (`--console-port`, a free one by default, printed on the ready line), 127.0.0.1
only unless --host says otherwise; `--no-console` turns it off.
"""
