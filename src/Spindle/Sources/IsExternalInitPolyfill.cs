#if !NET
namespace System.Runtime.CompilerServices;

/// <summary>netstandard2.1 stand-in for the marker type that <c>init</c> accessors need (built into .NET 5 and later).</summary>
internal static class IsExternalInit
{
}
#endif
