"""Drills as user commands: kill the daemon (``recovery``: kill9, disk-loss), or an
active with a standby (``failover``), at random moments and at every fault point, then
compare the counts with an oracle computed from the input alone.
"""
