"""p2p.proto stubs copied by proto/generate.sh from the registry's; do not edit."""
