"""Generated protobuf modules (scripts/gen_proto.sh); do not edit."""
