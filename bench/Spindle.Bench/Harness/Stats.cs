using System;
using System.Linq;

namespace SpindleLib.Bench.Harness;

/// <summary>Median and spread of a set of rounds.</summary>
public static class Stats
{
    public static double Median(double[] values)
    {
        if (values.Length == 0)
        {
            throw new ArgumentException("No values to take the median of.", nameof(values));
        }
        double[] sorted = values.OrderBy(v => v).ToArray();
        int mid = sorted.Length / 2;
        return sorted.Length % 2 == 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
    }

    /// <summary>Half the min–max range as a fraction of the median (0 when the median is 0).</summary>
    public static double Spread(double[] values)
    {
        double median = Median(values);
        if (median == 0)
        {
            return 0;
        }
        return (values.Max() - values.Min()) / 2 / Math.Abs(median);
    }
}
