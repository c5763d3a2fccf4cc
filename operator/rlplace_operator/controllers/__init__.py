"""The only modules with kopf decorators: the RLJob and NodeGroup controllers, the indexes, start-up."""
