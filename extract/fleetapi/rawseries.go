package fleetapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// seriesBody is the raw-series request the client sends: always both bounds
// (so the implicit 100-point cap never applies), explicit columns and an
// explicit limit.
type seriesBody struct {
	Variables      []string `json:"variables"`
	Columns        []string `json:"columns"`
	JoinDataframes bool     `json:"join_dataframes"`
	Start          int64    `json:"start"`
	End            int64    `json:"end"`
	Limit          int      `json:"limit"`
}

// trackingSink notes whether anything reached the caller's sink.
type trackingSink struct {
	FrameSink
	delivered bool
}

func (t *trackingSink) Point(i int, p Point) error {
	t.delivered = true
	return t.FrameSink.Point(i, p)
}

func (t *trackingSink) EndFrame(i, rows int) error {
	t.delivered = true
	return t.FrameSink.EndFrame(i, rows)
}

// Series streams the raw series of req into sink (POST
// /api/v1.6/data/raw/series with join_dataframes false, columns timestamp,
// value.value and value.context, explicit start, end and limit), decoding it
// as DecodeSeries does without holding the body.
//
// Failures before the sink receives anything are retried here. On error,
// the sink may have received a partial response, which the caller must
// discard; the error tells by Retryable whether reading the request again is
// worthwhile (a body cut mid-stream is), and a range reaching past retention
// is a *RetentionError.
func (c *Client) Series(ctx context.Context, req SeriesRequest, sink FrameSink) error {
	return c.series(ctx, req, sink, false)
}

// SeriesJoined is Series with join_dataframes true: the service outer-joins
// the variables on timestamp into one frame, which the decoder splits back
// into one frame per variable (holding the response's points meanwhile), so
// the sink sees the same shape as with Series. A variable's row count is the
// number of joined rows where it has a sample.
func (c *Client) SeriesJoined(ctx context.Context, req SeriesRequest, sink FrameSink) error {
	return c.series(ctx, req, sink, true)
}

func (c *Client) series(ctx context.Context, req SeriesRequest, sink FrameSink, joined bool) error {
	if len(req.VariableIDs) == 0 {
		return nil
	}
	body, err := json.Marshal(seriesBody{
		Variables: req.VariableIDs, Columns: seriesColumns, JoinDataframes: joined,
		Start: req.Start, End: req.End, Limit: req.Limit,
	})
	if err != nil {
		return fmt.Errorf("encode the raw series request: %w", err)
	}
	ts := &trackingSink{FrameSink: sink}
	err = c.do(ctx, &call{method: http.MethodPost, endpoint: epRawSeries, u: c.apiURL(dataPrefix, "/data/raw/series", nil),
		body: body, accept: "application/json", variables: req.VariableIDs,
		delivered: func() bool { return ts.delivered },
		handle: func(_ *http.Response, r io.Reader) error {
			return DecodeSeries(r, req, ts)
		}})
	if err != nil {
		return fmt.Errorf("raw series of %s over [%d, %d]: %w", describeVariables(req.VariableIDs), req.Start, req.End, err)
	}
	return nil
}

// describeVariables names a request's variables briefly.
func describeVariables(ids []string) string {
	switch len(ids) {
	case 1:
		return "variable " + ids[0]
	case 2:
		return fmt.Sprintf("2 variables [%s, %s]", ids[0], ids[1])
	default:
		return fmt.Sprintf("%d variables [%s, …, %s]", len(ids), ids[0], ids[len(ids)-1])
	}
}
