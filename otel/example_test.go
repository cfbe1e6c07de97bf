package distlockotel_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"strings"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memory"
	distlockotel "github.com/distlock/distlock/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// In a program: report to the global MeterProvider (set up by your
// OpenTelemetry SDK or exporter), grouping keys by their prefix so that
// per-run keys do not each make a time series.
func ExampleNew() {
	obs, err := distlockotel.New(distlockotel.WithKeyAttribute(func(key string) string {
		prefix, _, _ := strings.Cut(key, ":")
		return prefix
	}))
	if err != nil {
		log.Fatal(err)
	}
	locker, err := distlock.Open(context.Background(), "mem://", distlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
}

// The adapter feeding an SDK MeterProvider, read back with a ManualReader.
func Example() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := distlockotel.New(distlockotel.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}
	locker, err := memory.New(distlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	ctx := context.Background()
	err = locker.Do(ctx, "report", func(ctx context.Context, lease *distlock.Lease) error {
		_, err := locker.TryAcquire(ctx, "report") // held by us: busy
		fmt.Println("second TryAcquire:", err != nil)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				for _, dp := range h.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count=%d", m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Count))
				}
			}
		}
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// second TryAcquire: true
	// distlock.acquire.duration{distlock.backend=memory,distlock.outcome=acquired} count=1
	// distlock.acquire.duration{distlock.backend=memory,distlock.outcome=busy} count=1
	// distlock.lease.duration{distlock.backend=memory,distlock.outcome=released} count=1
}
