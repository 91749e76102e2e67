"""The registry's transports: the gRPC servicers (ModelExpress wire), the REST admin API,
and the mapping of core errors onto gRPC statuses and HTTP answers."""
