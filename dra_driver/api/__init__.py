"""Generated gRPC stubs (do not edit; regenerate with scripts/gen_protos.sh)."""
