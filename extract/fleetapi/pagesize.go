package fleetapi

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"go.uber.org/zap"
)

// The spec does not give the largest page_size the service accepts; a
// service may clamp a larger one (the walk then follows more `next` links)
// or reject it. servicePageSize is the lists' documented default, which the
// service surely accepts: after a 400 to a larger page_size, the Client
// lists with it.
const servicePageSize = 50

// smallerPages returns the first page's URL u again with page_size 50 when
// the service answered its larger page_size with a 400, and makes 50 the
// page size of the Client's later lists; nil when err is anything else.
func (c *Client) smallerPages(u *url.URL, err error) *url.URL {
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
		return nil
	}
	q := u.Query()
	size, perr := strconv.Atoi(q.Get("page_size"))
	if perr != nil || size <= servicePageSize {
		return nil
	}
	if c.pageSize.Swap(servicePageSize) > servicePageSize {
		c.log.Warn("the service rejected the configured page size; listing with the page size it documents as its default (set source.page_size to what it accepts to save requests)",
			zap.Int("page_size", size), zap.Int("now", servicePageSize), zap.String("path", u.EscapedPath()), zap.Error(err))
	}
	q.Set("page_size", strconv.Itoa(servicePageSize))
	v := *u
	v.RawQuery = q.Encode()
	return &v
}
