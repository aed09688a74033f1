/**
 * The version of the listener protocol (docs/listener-protocol.md) this service serves and the listener
 * agent speaks: the one definition of it. A file of its own with no imports, so that the agent's image
 * (deploy/Dockerfile) copies it without any of the service.
 */
export const PROTOCOL_VERSION = 1;
