"""The bookie wire protocol, sans-IO: framing, v2 binary and v3 protobuf codecs, digests.

Compatible with Apache BookKeeper 4.x. Nothing here does I/O.
"""
