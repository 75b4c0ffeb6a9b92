// Package compose holds the configuration baked into the relay image that
// compose.yaml builds (searchsync.yaml); its test checks that compose.yaml
// parses, that docs/compose.md names every service, and that the baked configuration is
// valid once compose supplies the environment.
package compose
