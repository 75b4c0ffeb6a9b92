package sink

// Header names of the fencing token on webhook requests and NATS messages.
const (
	HeaderPartition  = "Searchsync-Partition"
	HeaderLeaseEpoch = "Searchsync-Lease-Epoch"
)
