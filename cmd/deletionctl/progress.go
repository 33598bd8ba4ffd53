package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// rateWindow is how far back the rate of an estimate looks: from the last
// progress back to the latest progress point at least this old.
const rateWindow = time.Minute

// Status of one destructive step in inspect's progress.
const (
	statusPending    = "pending"
	statusInProgress = "in_progress"
	statusDone       = "done"
	statusAborted    = "aborted"
)

// progressView is inspect's progress: per destructive step what is done and
// what is left, with an estimate of the time left for the step in progress.
type progressView struct {
	// AsOf is the database clock when the progress was read.
	AsOf    time.Time       `json:"as_of"`
	Objects objectsProgress `json:"objects"`
	Purge   purgeProgress   `json:"purge"`
	Cache   cacheProgress   `json:"cache"`
}

// objectsProgress is the object deletion (stage drained): manifest chunks
// and keys of the frozen destructive manifest.
type objectsProgress struct {
	Stage         lifecycle.Stage `json:"stage"`
	Status        string          `json:"status"`
	ChunksTotal   int64           `json:"chunks_total"`
	ChunksDeleted int64           `json:"chunks_deleted"`
	KeysTotal     uint64          `json:"keys_total"`
	KeysDeleted   uint64          `json:"keys_deleted"`
	Estimate      *estimate       `json:"estimate"`
}

// purgeProgress is the PostgreSQL purge (stage bindings_removed): rows per
// table of the frozen inventory against rows purged.
type purgeProgress struct {
	Stage      lifecycle.Stage `json:"stage"`
	Status     string          `json:"status"`
	RowsTotal  int64           `json:"rows_total"`
	RowsPurged int64           `json:"rows_purged"`
	Tables     []tableProgress `json:"tables"`
	Estimate   *estimate       `json:"estimate"`
}

type tableProgress struct {
	Table string `json:"table"`
	// Action is "delete" or "nullify".
	Action string `json:"action"`
	// RowsTotal is the frozen inventory's row count (rows written before
	// the fence may add to it).
	RowsTotal  int64 `json:"rows_total"`
	RowsPurged int64 `json:"rows_purged"`
	Done       bool  `json:"done"`
}

// cacheProgress is the cache purge (stage postgres_purged).
type cacheProgress struct {
	Stage  lifecycle.Stage `json:"stage"`
	Status string          `json:"status"`
	// KeysDeleted is what the purge reported, once done.
	KeysDeleted *int64 `json:"keys_deleted"`
}

// estimate is the time left of a step from its recent rate.
type estimate struct {
	// Unit is what Rate counts: "chunks" or "rows".
	Unit string `json:"unit"`
	// RatePerSecond is Unit per second between the anchor and the last
	// progress, over WindowSeconds.
	RatePerSecond float64 `json:"rate_per_second"`
	WindowSeconds float64 `json:"window_seconds"`
	// Remaining is how many Unit are left.
	Remaining float64 `json:"remaining"`
	// LastProgressAt is the last progress; ETA is LastProgressAt plus
	// Remaining/RatePerSecond.
	LastProgressAt time.Time `json:"last_progress_at"`
	ETA            time.Time `json:"eta"`
	// SecondsLeft is from AsOf to ETA, or null when ETA has passed: the
	// step is slower than its recent rate, or stalled, and no time left can
	// honestly be given (Overdue).
	SecondsLeft *float64 `json:"seconds_left"`
	Overdue     bool     `json:"overdue"`
}

// point is a step's cumulative progress at a time.
type point struct {
	at    time.Time
	value float64
}

// recentRate returns the rate of points (sorted by time, cumulative) over
// the last window: from the latest point at least window older than the last
// one (or the first point, when none is) to the last point. It reports no
// rate when that span or the progress in it is zero.
func recentRate(points []point, window time.Duration) (rate float64, span time.Duration, ok bool) {
	if len(points) < 2 {
		return 0, 0, false
	}
	last := points[len(points)-1]
	anchor := points[0]
	for _, p := range points[:len(points)-1] {
		if !p.at.After(last.at.Add(-window)) {
			anchor = p
		}
	}
	span = last.at.Sub(anchor.at)
	done := last.value - anchor.value
	if span <= 0 || done <= 0 {
		return 0, 0, false
	}
	return done / span.Seconds(), span, true
}

// estimateLeft is the estimate for remaining units from points, or nil
// without a rate or with nothing left.
func estimateLeft(points []point, remaining float64, unit string, now time.Time) *estimate {
	rate, span, ok := recentRate(points, rateWindow)
	if !ok || remaining <= 0 {
		return nil
	}
	last := points[len(points)-1].at
	eta := last.Add(time.Duration(remaining / rate * float64(time.Second)))
	e := &estimate{
		Unit: unit, RatePerSecond: rate, WindowSeconds: span.Seconds(), Remaining: remaining,
		LastProgressAt: last, ETA: eta, Overdue: !eta.After(now),
	}
	if !e.Overdue {
		left := eta.Sub(now).Seconds()
		e.SecondsLeft = &left
	}
	return e
}

// stepStatus is the status of the step run at stage, for a request at
// current.
func stepStatus(stage, current lifecycle.Stage) string {
	if current == lifecycle.StageAborted {
		return statusAborted
	}
	order := lifecycle.Stages()
	at, cur := slices.Index(order, stage), slices.Index(order, current)
	switch {
	case cur < at:
		return statusPending
	case cur == at:
		return statusInProgress
	default:
		return statusDone
	}
}

// completedAt returns when the completed checkpoint stage/unit was recorded.
func completedAt(checkpoints []lifecycle.Checkpoint, stage lifecycle.Stage, unit string) (time.Time, bool) {
	for _, c := range checkpoints {
		if c.Stage == stage && c.UnitKey == unit && c.Status == "completed" && c.CompletedAt != nil {
			return *c.CompletedAt, true
		}
	}
	return time.Time{}, false
}

// buildProgress computes inspect's progress from the inspection and the
// recorded progress.
func buildProgress(in *lifecycle.Inspection, p *lifecycle.Progress) progressView {
	r := in.Request
	view := progressView{
		AsOf: p.Now,
		Objects: objectsProgress{Stage: lifecycle.StageDrained, Status: stepStatus(lifecycle.StageDrained, r.Stage),
			ChunksTotal: in.ChunksTotal, ChunksDeleted: in.ChunksDeleted},
		Purge: purgeProgress{Stage: lifecycle.StageBindingsRemoved, Status: stepStatus(lifecycle.StageBindingsRemoved, r.Stage),
			Tables: []tableProgress{}},
		Cache: cacheProgress{Stage: lifecycle.StagePostgresPurged, Status: stepStatus(lifecycle.StagePostgresPurged, r.Stage)},
	}

	// Objects: keys of the destructive manifest (else the inventory's).
	storage := r.DestructiveStorage
	if storage == nil && r.Inventory != nil {
		storage = &r.Inventory.Storage
	}
	if storage != nil {
		for _, pm := range storage.Prefixes {
			view.Objects.KeysTotal += pm.ObjectCount
		}
	}
	for _, c := range in.Checkpoints {
		if c.Stage == lifecycle.StageDrained && strings.HasPrefix(c.UnitKey, "chunk:") && c.Status == "completed" {
			var d struct {
				Keys uint64 `json:"keys"`
			}
			if json.Unmarshal(c.Detail, &d) == nil {
				view.Objects.KeysDeleted += d.Keys
			}
		}
	}
	if view.Objects.Status == statusDone {
		// The chunks are dropped at logical verification; the step's own
		// checkpoint keeps the totals.
		for _, c := range in.Checkpoints {
			if c.Stage == lifecycle.StageDrained && c.UnitKey == "remove_storage_bindings" && c.Status == "completed" {
				var d struct {
					Chunks  int64  `json:"chunks"`
					Objects uint64 `json:"objects"`
				}
				if json.Unmarshal(c.Detail, &d) == nil && d.Chunks > 0 {
					view.Objects.ChunksTotal, view.Objects.ChunksDeleted = d.Chunks, d.Chunks
					view.Objects.KeysTotal, view.Objects.KeysDeleted = d.Objects, d.Objects
				}
			}
		}
	}
	if view.Objects.Status == statusInProgress {
		var points []point
		if at, ok := completedAt(in.Checkpoints, lifecycle.StageFenced, "serving_writes_drained"); ok {
			points = append(points, point{at: at})
		}
		for i, at := range p.ChunkStamps {
			points = append(points, point{at: at, value: float64(i + 1)})
		}
		view.Objects.Estimate = estimateLeft(points, float64(in.ChunksTotal-in.ChunksDeleted), "chunks", p.Now)
	}

	// Purge: rows per table of the frozen inventory against rows purged.
	recorded := map[string]lifecycle.PurgeTableProgress{}
	for _, t := range p.Purge {
		recorded[t.Table] = t
	}
	var counts map[string]int64
	nullify := map[string]bool{}
	if r.Inventory != nil {
		counts = r.Inventory.Schema.RowCounts
		for _, t := range r.Inventory.Schema.NullifyTables {
			nullify[t] = true
		}
	}
	tables := slices.Sorted(func(yield func(string) bool) {
		seen := map[string]bool{}
		for t := range counts {
			seen[t] = true
			if !yield(t) {
				return
			}
		}
		for t := range recorded {
			if !seen[t] && !yield(t) {
				return
			}
		}
	})
	var remaining int64
	for _, table := range tables {
		tp := tableProgress{Table: table, Action: "delete", RowsTotal: counts[table]}
		if nullify[table] {
			tp.Action = "nullify"
		}
		if rec, ok := recorded[table]; ok {
			tp.Action, tp.RowsPurged, tp.Done = rec.Action, rec.Rows, rec.Done
		}
		if view.Purge.Status == statusDone {
			tp.Done = true
		}
		if !tp.Done {
			remaining += max(0, tp.RowsTotal-tp.RowsPurged)
		}
		view.Purge.RowsTotal += tp.RowsTotal
		view.Purge.RowsPurged += tp.RowsPurged
		view.Purge.Tables = append(view.Purge.Tables, tp)
	}
	if view.Purge.Status == statusInProgress {
		var points []point
		if at, ok := completedAt(in.Checkpoints, lifecycle.StageDrained, "remove_storage_bindings"); ok {
			points = append(points, point{at: at})
		}
		// The purge walks one table at a time: each table's last update is
		// a point of the cumulative count.
		var cumulative int64
		for _, t := range p.Purge {
			cumulative += t.Rows
			points = append(points, point{at: t.UpdatedAt, value: float64(cumulative)})
		}
		view.Purge.Estimate = estimateLeft(points, float64(remaining), "rows", p.Now)
	}

	// Cache: the keys its purge reported.
	for _, c := range in.Checkpoints {
		if c.Stage == lifecycle.StagePostgresPurged && c.UnitKey == "purge_cache_namespace" && c.Status == "completed" {
			var d struct {
				Keys *int64 `json:"keys"`
			}
			if json.Unmarshal(c.Detail, &d) == nil {
				view.Cache.KeysDeleted = d.Keys
			}
		}
	}
	return view
}

// writeProgress prints the progress for a person.
func writeProgress(w io.Writer, p progressView) error {
	fmt.Fprintln(w, "progress:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  objects (%s):\t%s\t%d of %d chunks, %d of %d keys deleted\n", p.Objects.Stage, p.Objects.Status,
		p.Objects.ChunksDeleted, p.Objects.ChunksTotal, p.Objects.KeysDeleted, p.Objects.KeysTotal)
	if p.Objects.Status == statusInProgress {
		fmt.Fprintf(tw, "  \t\t%s\n", describeEstimate(p.Objects.Estimate, p.AsOf))
	}
	fmt.Fprintf(tw, "  purge (%s):\t%s\t%d of %d rows\n", p.Purge.Stage, p.Purge.Status, p.Purge.RowsPurged, p.Purge.RowsTotal)
	if p.Purge.Status == statusInProgress {
		fmt.Fprintf(tw, "  \t\t%s\n", describeEstimate(p.Purge.Estimate, p.AsOf))
	}
	for _, t := range p.Purge.Tables {
		state := ""
		if t.Done {
			state = " (done)"
		}
		fmt.Fprintf(tw, "    %s\t%s\t%d of %d%s\n", t.Table, t.Action, t.RowsPurged, t.RowsTotal, state)
	}
	keys := ""
	if p.Cache.KeysDeleted != nil {
		keys = strconv.FormatInt(*p.Cache.KeysDeleted, 10) + " keys deleted"
	}
	fmt.Fprintf(tw, "  cache (%s):\t%s\t%s\n", p.Cache.Stage, p.Cache.Status, keys)
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("inspect: write: %w", err)
	}
	return nil
}

// describeEstimate renders e on one line: the time left, or, past the
// ETA its recent rate gave, that there is no honest estimate.
func describeEstimate(e *estimate, now time.Time) string {
	if e == nil {
		return "eta: unknown (no rate yet)"
	}
	window := time.Duration(e.WindowSeconds * float64(time.Second)).Round(time.Second)
	since := now.Sub(e.LastProgressAt).Round(time.Second)
	if e.SecondsLeft == nil {
		return fmt.Sprintf("eta: none: %.0f %s left, and it is slower than its rate of %.1f %s/s over the last %s, which had it done by %s; last progress %s ago",
			e.Remaining, e.Unit, e.RatePerSecond, e.Unit, window, stamp(e.ETA), since)
	}
	return fmt.Sprintf("eta: %s left (at %s), %.1f %s/s over the last %s; last progress %s ago",
		(time.Duration(*e.SecondsLeft * float64(time.Second))).Round(time.Second), stamp(e.ETA),
		e.RatePerSecond, e.Unit, window, since)
}
