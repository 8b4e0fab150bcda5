package clickhouse

import (
	"cmp"
	"context"
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetsync/fleetsync/pipeline"
	"github.com/fleetsync/fleetsync/pipeline/metadata"
)

// The devices and variables tables are written change by change: a
// cycle compares each walked object with its stored row through a
// fingerprint of the row's content (every column but id, deleted,
// synced_at and version), computed by the server from the stored row and
// by fleetsync from the row it would write, and writes only the objects
// whose live row is missing or differs. The fingerprints are read from
// the table itself, once per cycle, before the walk's first object, into
// a storedIndex of a few integers a row: whatever put the table in its
// state (a crash between two INSERTs, a hand-made change, a second
// writer) is seen, so the comparison is exact without anything kept
// beside the table. synced_at is therefore when the row was last written,
// i.e. since when the source has shown the object as it is. The walk then
// comes a page at a time (changes.Write), and once it is complete the live
// rows it never showed are read again by id (changes.Missing), so that no
// step holds the fleet's ids.

// metadataInsertRows bounds the rows of one INSERT of devices or
// variables, so that the driver's column buffers stay small however large
// the fleet: a first sync of 10^6 variables holds 10,000 of them and their
// block's buffers (about 10 MB) rather than 50,000 (about 55 MB, a fifth
// of its peak heap), for 100 INSERTs instead of 20.
const metadataInsertRows = 10000

// fpString is the fingerprint encoding of a String column: its length in
// bytes, a colon and the bytes, so that no two sequences of values encode
// alike.
func fpString(col string) string { return "toString(length(" + col + ")), ':', " + col }

// fpSQL is the server's fingerprint of a row: the first 8 bytes of the MD5
// of its encoded columns, little-endian, as fingerprint computes it.
func fpSQL(parts ...string) string {
	return "reinterpretAsUInt64(MD5(concat(" + strings.Join(parts, ", ") + ")))"
}

var (
	deviceFingerprintSQL = fpSQL(fpString("label"), fpString("name"), fpString("description"), fpString("url"), fpString("properties"),
		"toString(length(tags)), ':', arrayStringConcat(arrayMap(t -> concat(toString(length(t)), ':', t), tags))",
		fpString("organization_id"), "toString(toUInt32(created_at)), ';'", "toString(last_activity_ms), ';'")
	variableFingerprintSQL = fpSQL(fpString("device_id"), fpString("device_label"), fpString("label"), fpString("name"), fpString("properties"),
		fpString("color"), "toString(toUInt32(created_at)), ';'", "toString(last_activity_ms), ';'")
)

// fingerprint computes what fpSQL computes, value by value.
type fingerprint struct {
	buf []byte
}

func (f *fingerprint) str(s string) {
	f.buf = strconv.AppendInt(f.buf, int64(len(s)), 10)
	f.buf = append(f.buf, ':')
	f.buf = append(f.buf, s...)
}

func (f *fingerprint) strs(list []string) {
	f.buf = strconv.AppendInt(f.buf, int64(len(list)), 10)
	f.buf = append(f.buf, ':')
	for _, s := range list {
		f.str(s)
	}
}

func (f *fingerprint) int(n int64) {
	f.buf = strconv.AppendInt(f.buf, n, 10)
	f.buf = append(f.buf, ';')
}

func (f *fingerprint) sum() uint64 {
	s := md5.Sum(f.buf)
	f.buf = f.buf[:0]
	return binary.LittleEndian.Uint64(s[:8])
}

// device is the fingerprint of the row WriteDevices writes for d.
func (f *fingerprint) device(d pipeline.Device) uint64 {
	f.str(d.Label)
	f.str(d.Name)
	f.str(d.Description)
	f.str(d.URL)
	f.str(jsonText(d.Properties))
	f.strs(d.Tags)
	f.str(d.Organization)
	f.int(clampTime(d.CreatedAt).Unix())
	f.int(d.LastActivityMs)
	return f.sum()
}

// variable is the fingerprint of the row WriteVariables writes for v.
func (f *fingerprint) variable(v pipeline.Variable) uint64 {
	f.str(v.DeviceID)
	f.str(v.DeviceLabel)
	f.str(v.Label)
	f.str(v.Name)
	f.str(jsonText(v.Properties))
	f.str(colorOf(v.Properties))
	f.int(clampTime(v.CreatedAt).Unix())
	f.int(v.LastActivityMs)
	return f.sum()
}

// storedIndex is what a change-by-change write compares the walk with:
// the live rows of a table as they were when the walk began, each as a
// 128-bit hash of its id (key, check) and its fingerprint, sorted, with a
// bit telling whether the walk has shown it. It holds no id: 10^6
// variables cost about 24 MB here (TestStoredIndexBytesPerRow), where their
// ids alone would take 80 MB and more.
//
// Two ids are taken for the same row when both hashes agree: seeded anew
// for each index, key and check are independent 64-bit hashes, so two of
// 10^6 ids agree on both with a chance near 10^12/2^129, far below that of
// two contents sharing the 64-bit fingerprint the comparison already
// trusts. A key shared by several ids (likelier, and forced by the tests)
// is told apart by check.
type storedIndex struct {
	hash    func(id string) idHash
	entries []storedEntry // sorted by (key, check)
	seen    []uint64      // a bit per entry: a Write was given its id
	nseen   int           // how many bits of seen are set
}

// idHash is the 128-bit identity of an id in a storedIndex.
type idHash struct{ key, check uint64 }

type storedEntry struct {
	idHash
	fp uint64
}

// newIDHash returns the hash of a new storedIndex: two maphashes of the
// id under independent random seeds.
func newIDHash() func(string) idHash {
	k, c := maphash.MakeSeed(), maphash.MakeSeed()
	return func(id string) idHash { return idHash{maphash.String(k, id), maphash.String(c, id)} }
}

func (x *storedIndex) add(id string, fp uint64) {
	x.entries = append(x.entries, storedEntry{x.hash(id), fp})
}

// seal sorts the entries once every row is added. The array lives for the
// whole walk while the growth slack of append is up to a quarter of it, so
// a loose one is copied to its exact size.
func (x *storedIndex) seal() {
	if n := len(x.entries); cap(x.entries)-n > n/16 {
		x.entries = slices.Clone(x.entries)
	}
	slices.SortFunc(x.entries, func(a, b storedEntry) int { return compareIDHash(a.idHash, b.idHash) })
	x.seen = make([]uint64, (len(x.entries)+63)/64)
}

func compareIDHash(a, b idHash) int {
	if c := cmp.Compare(a.key, b.key); c != 0 {
		return c
	}
	return cmp.Compare(a.check, b.check)
}

// find returns the position of the entry of h, or -1 when no stored row
// has it (an object new since the walk began).
func (x *storedIndex) find(h idHash) int {
	i, ok := slices.BinarySearchFunc(x.entries, h, func(e storedEntry, h idHash) int { return compareIDHash(e.idHash, h) })
	if !ok {
		return -1
	}
	return i
}

func (x *storedIndex) markSeen(i int) {
	if !x.wasSeen(i) {
		x.seen[i/64] |= 1 << (i % 64)
		x.nseen++
	}
}

func (x *storedIndex) wasSeen(i int) bool { return x.seen[i/64]&(1<<(i%64)) != 0 }

// changes stores one walk's objects of a table (devices or variables)
// change by change against a storedIndex read when it began. Its Write
// and Missing implement metadata.VariableChanges.
type changes[T any] struct {
	c         *Metadata
	table     string
	deviceCol string // what Missing names each row's device by
	id        func(T) string
	fp        func(*fingerprint, T) uint64
	write     func(ctx context.Context, objs []T) error

	// mu guards x and held: the walk calls Write one page at a time, but
	// nothing is lost by allowing more.
	mu   sync.Mutex
	x    storedIndex
	held []T
}

// changedDevices and changedVariables begin a walk's changes of their
// table; hash is the index's, injectable so that tests can force
// collisions.
func (c *Metadata) changedDevices(ctx context.Context, syncedAt time.Time, hash func(string) idHash) (*changes[pipeline.Device], error) {
	ch := &changes[pipeline.Device]{c: c, table: TableDevices, deviceCol: "''",
		id: func(d pipeline.Device) string { return d.ID },
		fp: (*fingerprint).device,
		write: func(ctx context.Context, ds []pipeline.Device) error {
			return c.WriteDevices(ctx, ds, syncedAt)
		}}
	return ch, ch.read(ctx, deviceFingerprintSQL, hash)
}

func (c *Metadata) changedVariables(ctx context.Context, syncedAt time.Time, hash func(string) idHash) (*changes[pipeline.Variable], error) {
	ch := &changes[pipeline.Variable]{c: c, table: TableVariables, deviceCol: "device_id",
		id: func(v pipeline.Variable) string { return v.ID },
		fp: (*fingerprint).variable,
		write: func(ctx context.Context, vs []pipeline.Variable) error {
			return c.WriteVariables(ctx, vs, syncedAt)
		}}
	return ch, ch.read(ctx, variableFingerprintSQL, hash)
}

// read builds ch's index from the live rows' fingerprints (fpExpr),
// streamed by one query.
func (ch *changes[T]) read(ctx context.Context, fpExpr string, hash func(string) idHash) error {
	ch.x = storedIndex{hash: hash}
	query := "SELECT id, " + fpExpr + " FROM " + ch.c.table(ch.table) + " FINAL WHERE deleted = 0"
	err := func() error {
		rows, err := ch.c.conn.Query(ctx, query)
		if err != nil {
			return err
		}
		defer rows.Close()
		var id string
		var fp uint64
		for rows.Next() {
			if err := rows.Scan(&id, &fp); err != nil {
				return err
			}
			ch.x.add(id, fp)
		}
		return rows.Err()
	}()
	if err != nil {
		return fmt.Errorf("read the fingerprints of %s: %w", ch.c.table(ch.table), err)
	}
	ch.x.seal()
	return nil
}

// Write stores the objects whose row differs from what they would write,
// and returns how many those were. The row is the live one as it was when
// the walk began, or what an earlier Write of the walk gave for the same
// id: an object listed twice is written again only if it changed in
// between, and the last one listed is the one stored. An object new since
// the walk began has no row in the index to update, so it is written each
// time it is listed (alike rows, one once merged): remembering new ones
// would hold the whole fleet in a first sync. Each object marks
// its stored row seen, for Missing. The objects to write are held until
// metadataInsertRows of them make one INSERT (Missing writes the rest), so
// that a first walk of 10^6 variables, handed on a page at a time, makes
// 100 parts, not a thousand.
func (ch *changes[T]) Write(ctx context.Context, objs []T) (written int, err error) {
	var f fingerprint
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for _, o := range objs {
		fp := ch.fp(&f, o)
		i := ch.x.find(ch.x.hash(ch.id(o)))
		if i >= 0 {
			ch.x.markSeen(i)
			if ch.x.entries[i].fp == fp {
				continue
			}
			ch.x.entries[i].fp = fp
		}
		ch.held = append(ch.held, o)
		written++
		if len(ch.held) == metadataInsertRows {
			if err := ch.flush(ctx); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// flush writes the objects Write held. Caller holds ch.mu.
func (ch *changes[T]) flush(ctx context.Context) error {
	if len(ch.held) == 0 {
		return nil
	}
	if err := ch.write(ctx, ch.held); err != nil {
		return err
	}
	clear(ch.held)
	ch.held = ch.held[:0]
	return nil
}

// Missing returns the rows that were live when the walk began and that no
// Write was given, each with its device. Their ids are not held, so the
// live rows are read again and each is looked up: one never seen is
// missing; one without an entry was inserted since (by a Write of this
// walk, or by another writer) and is not. When the walk showed every row,
// as in a cycle in which nothing was deleted, nothing is read.
func (ch *changes[T]) Missing(ctx context.Context) ([]metadata.StoredRef, error) {
	ch.mu.Lock()
	err := ch.flush(ctx)
	all := ch.x.nseen == len(ch.x.entries)
	ch.mu.Unlock()
	if err != nil || all {
		return nil, err
	}
	var missing []metadata.StoredRef
	query := "SELECT id, " + ch.deviceCol + " FROM " + ch.c.table(ch.table) + " FINAL WHERE deleted = 0"
	err = func() error {
		rows, err := ch.c.conn.Query(ctx, query)
		if err != nil {
			return err
		}
		defer rows.Close()
		var id, dev string
		for rows.Next() {
			if err := rows.Scan(&id, &dev); err != nil {
				return err
			}
			ch.mu.Lock()
			i := ch.x.find(ch.x.hash(id))
			gone := i >= 0 && !ch.x.wasSeen(i)
			ch.mu.Unlock()
			if gone {
				missing = append(missing, metadata.StoredRef{ID: id, DeviceID: dev})
			}
		}
		return rows.Err()
	}()
	if err != nil {
		return nil, fmt.Errorf("list the live rows of %s: %w", ch.c.table(ch.table), err)
	}
	return missing, nil
}

// WriteChangedDevices stores the devices whose live row is missing or
// differs and returns the live rows devices lacks: the whole of a walk's
// changes at once, since a fleet has few devices.
func (c *Metadata) WriteChangedDevices(ctx context.Context, devices []pipeline.Device, syncedAt time.Time) (metadata.Diff, error) {
	var diff metadata.Diff
	ch, err := c.changedDevices(ctx, syncedAt, newIDHash())
	if err != nil {
		return diff, err
	}
	if diff.Written, err = ch.Write(ctx, devices); err != nil {
		return diff, err
	}
	diff.Missing, err = ch.Missing(ctx)
	return diff, err
}

// ChangedVariables begins storing one walk's variables change by change
// (see changes), a page at a time, against the live rows as they are now.
func (c *Metadata) ChangedVariables(ctx context.Context, syncedAt time.Time) (metadata.VariableChanges, error) {
	ch, err := c.changedVariables(ctx, syncedAt, newIDHash())
	if err != nil {
		return nil, err
	}
	return ch, nil
}
