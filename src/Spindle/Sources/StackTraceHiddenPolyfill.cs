#if !NET
namespace System.Diagnostics;

/// <summary>
/// netstandard2.1 stand-in for .NET 6's attribute that leaves a method (or every method of a type) out of exception stack
/// traces, so that Spindle's pass-through frames can be marked once for every build. Only the net8.0 and net10.0
/// runtimes honour the real one; on netstandard2.1 (Mono, Unity) this copy has no effect and traces keep those frames.
/// </summary>
[AttributeUsage(AttributeTargets.Class | AttributeTargets.Method | AttributeTargets.Constructor | AttributeTargets.Struct, Inherited = false)]
internal sealed class StackTraceHiddenAttribute : Attribute
{
}
#endif
