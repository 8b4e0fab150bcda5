// Package metadata is the metadata stage of a sync cycle, beside the
// engine: it keeps the fleet's metadata in the warehouse (devices,
// variables, device groups and their members, organizations) from the
// cycle's walk, and syncs the configured events' logs.
//
// The Syncer knows these stages only by the small ports of package
// pipeline (pipeline.SnapshotWriter as Stages.Metadata,
// pipeline.EventSyncer as Stages.Events), so that the engine and the
// cycle read without the groups, organizations and event logs, and an
// adapter that has no metadata implements none of this package's ports.
// This package may import pipeline; pipeline never imports it.
package metadata
