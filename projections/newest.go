package projections

// NewestSchemaVersion is the schema_version Upcast brings a payload of
// eventType to for a projection that reads target (its schema_version): the
// larger of target and every matching upcaster's N+1. The dry run
// (projections/dryrun) shows it as the upcast's "to".
func (s *Set) NewestSchemaVersion(eventType string, target int) int {
	return max(target, s.newest(eventType))
}
