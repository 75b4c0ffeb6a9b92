package dashboard

import "github.com/searchsync/searchsync/indexer"

// EngineOf describes the engine connection of cfg for status, the console
// and the start-up log: the auth method, never its secret.
func EngineOf(cfg indexer.Config) *Engine {
	addrs, err := cfg.Addresses()
	if err != nil {
		addrs = []string{"(engine.cloud_id: " + err.Error() + ")"}
	}
	return &Engine{
		Kind:               cfg.Kind,
		Addresses:          addrs,
		Auth:               cfg.AuthSummary(),
		TLS:                indexer.TLSSummary(cfg),
		InsecureSkipVerify: cfg.TLS.InsecureSkipVerify,
		Warning:            indexer.TLSWarning(cfg),
	}
}
