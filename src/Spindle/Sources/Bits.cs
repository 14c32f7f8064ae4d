using System.Runtime.CompilerServices;
#if NET
using System.Numerics;
#endif

namespace SpindleLib;

/// <summary>Bit operations on 64-bit words: the intrinsics on .NET, portable loops on netstandard2.1.</summary>
internal static class Bits
{
    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static int TrailingZeroCount(ulong value)
    {
#if NET
        return BitOperations.TrailingZeroCount(value);
#else
        if (value == 0)
        {
            return 64;
        }
        int n = 0;
        while ((value & 1) == 0)
        {
            value >>= 1;
            n++;
        }
        return n;
#endif
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static int LeadingZeroCount(ulong value)
    {
#if NET
        return BitOperations.LeadingZeroCount(value);
#else
        if (value == 0)
        {
            return 64;
        }
        int n = 0;
        while ((value & (1UL << 63)) == 0)
        {
            value <<= 1;
            n++;
        }
        return n;
#endif
    }

    [MethodImpl(MethodImplOptions.AggressiveInlining)]
    public static ulong RotateRight(ulong value, int offset)
    {
#if NET
        return BitOperations.RotateRight(value, offset);
#else
        offset &= 63;
        return offset == 0 ? value : (value >> offset) | (value << (64 - offset));
#endif
    }
}
