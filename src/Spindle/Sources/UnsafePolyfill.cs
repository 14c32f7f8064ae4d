#if !NET
namespace SpindleLib;

/// <summary>
/// netstandard2.1 stand-in for <c>System.Runtime.CompilerServices.Unsafe.As</c> (that type needs a package there): a
/// checked cast, correct everywhere, only without the saved type check.
/// </summary>
internal static class Unsafe
{
    public static T As<T>(object o) where T : class => (T)o;
}
#endif
