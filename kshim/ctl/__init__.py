"""`kshim ctl --data-dir D <command>`: look at and disturb a running `kshim serve --brokers N` cluster
(or a single `kshim serve`: status, groups, txns, scram, compact, telemetry, fault and requests). Every
command takes --json for machine-readable output (JSON is the default of those that print data).

`status` and the node commands (kill, start, pause, resume, isolate, heal) are one request to the
supervisor (`kshim serve --brokers N`) over <data-dir>/supervisor.sock, which asks the controller
what it needs; a single `kshim serve` answers `status` on <data-dir>/broker.sock. Process commands
(kill, start, pause, resume) are carried out by the supervisor, on the processes it started: ctl
itself never signals anything. `compact`, `telemetry`, `fault`, `net` and `requests` call each
broker's admin socket (<data-dir>/broker-i/broker.sock, or a single `kshim serve`'s
<data-dir>/broker.sock). `groups`, `txns` and `scram` ask the brokers with the Kafka protocol (found
through the controller, connecting over the inter-broker listener as the inter-broker user; or
--bootstrap for any Kafka cluster, with --command-config FILE for its credentials:
docs/security.md).

    status [--table]   JSON (or a table): the controller (pid, state, restarts), brokers,
                       partitions, leaders, ISRs, reassignments under way, each replica's state
                       (online, offline, adding, removing) and lag, replica offsets, replicas
                       still to delete on brokers that are down; a single `kshim serve`
                       answers too (its broker's own view)
    kill NODE          SIGKILL the broker: it stays down until `start`
    kill controller    SIGKILL the controller process: the supervisor restarts it at once
    start NODE         start a stopped broker again on its data dir; returns once it registered
    pause NODE         SIGSTOP: it stops heartbeating and is fenced after the session timeout
    resume NODE        SIGCONT: it registers again
    isolate NODE       replication traffic to and from it is dropped, while it stays up
    heal NODE          end the isolation
    groups [--bootstrap HOST:PORT [--command-config FILE]] [--group ID] [--table]
                       consumer groups: state, members, assignments, committed offsets, lag
    txns [--bootstrap HOST:PORT [--command-config FILE]] [--state STATE]... [--producers TOPIC]
         [--abort TXN_ID] [--json]
                       transactions: coordinator, state, producer, running time, partitions;
                       --producers TOPIC: each partition's producers and open transactions;
                       --abort TXN_ID: abort its open transaction by hand, fencing its producer
    scram add USER --mechanism SCRAM-SHA-256|SCRAM-SHA-512 [--password P | --password-stdin]
              [--iterations N]
    scram list [USER...] | scram delete USER --mechanism M
                       SCRAM users (AlterUserScramCredentials, DescribeUserScramCredentials;
                       the salted password is computed here); also --bootstrap, --command-config
    compact TOPIC [PARTITION]
                       clean a compacted topic's logs now on every broker (also a single
                       `kshim serve`): each broker's <data dir>/broker.sock; JSON per replica
    fault add ACTION [--api API] [--topic T [--partition P]] [--client-id ID] [--error CODE]
              [--delay-ms MS] [--after N] [--count N] [--duration-ms MS] [--broker NODE]
    fault list | fault clear [ID]
                       request fault rules of every broker (or --broker NODE), also a single
                       `kshim serve`: error, delay, drop, timeout (docs/faults.md)
    net partition|latency|loss A B [--ms MS] [--percent P] [--duration-ms MS]; net heal [A B]
                       faults of the replication traffic between brokers A and B, both ways
    requests [--follow] [--api API] [--client-id ID] [--broker NODE]
                       the brokers' request logs as JSON lines: api, version, client id,
                       partitions, errors, latency, the fault rule applied
    telemetry [--broker NODE] [--json]
                       client instances that pushed metrics (KIP-714) and their latest metrics

The command line is kshim.ctl.commands; this package imports nothing, so the modules that use a
part of ctl (the console, kshim.testing) load only that part.
"""
