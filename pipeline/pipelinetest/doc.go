// Package pipelinetest is the test kit of the engine's ports: one
// in-memory, concurrency-safe fake each of pipeline.Source (Source),
// pipeline.Writer (Writer) and pipeline.StateStore (Store), for pipeline's
// tests, the simulation's and the adapters'. A test that needs a fake to
// fail, wait, count or hold sets one of its hook fields (OnSeries, OnWalk,
// OnCount, OnBegin, OnAppend, OnCommit) instead of wrapping the fake in a
// type of its own. Only tests import it.
package pipelinetest
