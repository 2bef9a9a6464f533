"""Replication between brokers: followers fetch from leaders; leaders keep the ISR current.

`run_replication(broker, ...)` runs both for one broker until cancelled: it starts a fetcher per
leader broker this broker follows, following metadata images as leadership moves.

`run_replication` is in kshim.replication.run; this package imports nothing, so a client of the
brokers (`kshim ctl`, through kshim.replication.client) loads no fetcher, partition or log code.
"""
